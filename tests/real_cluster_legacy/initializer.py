"""A pod initializer written on the seeds' own library, ai2-kubernetes-initializer (PyPI), the
owner that the legacy scenarios kill and revive.

It accepts every pod whose head initializer is NAME (the library removes it with an update, as
its README asks: "this *must* be a replace_ method"), and renews the
coordination.k8s.io/v1beta1 Lease LEASE_NAMESPACE/LEASE_NAME that the guard watches as the
initializer's owner, as a controller renews its leader lock. The library's example rejects
objects without an `owner` label and handles Deployments and Jobs too; this one handles pods
only and accepts everything.

usage: initializer.py KUBECONFIG NAME LEASE_NAMESPACE LEASE_NAME
"""

import datetime
import logging
import sys
import threading
import time

import kubernetes
from ai2.kubernetes.initializer import (
    InitializerController,
    ResourceHandler,
    SimpleResourceController,
)

LEASE_SECONDS = 5


def renew_once(coordination, namespace, name, holder):
    """Renew the Lease, creating it when missing."""
    now = datetime.datetime.now(datetime.timezone.utc)
    spec = kubernetes.client.V1beta1LeaseSpec(
        holder_identity=holder, lease_duration_seconds=LEASE_SECONDS, renew_time=now
    )
    try:
        coordination.patch_namespaced_lease(name, namespace, {"spec": spec})
    except kubernetes.client.rest.ApiException as e:
        if e.status != 404:
            raise
        lease = kubernetes.client.V1beta1Lease(
            metadata=kubernetes.client.V1ObjectMeta(name=name, namespace=namespace),
            spec=spec,
        )
        coordination.create_namespaced_lease(namespace, lease)


def renew_forever(api_client, namespace, name, holder):
    """Renew the Lease every second for as long as the process lives: a failed renewal (a
    conflict, a timeout on a loaded machine) is logged and the next one tried, so the owner
    looks down only when the process is gone."""
    coordination = kubernetes.client.CoordinationV1beta1Api(api_client)
    while True:
        try:
            renew_once(coordination, namespace, name, holder)
        except Exception as e:  # noqa: BLE001 - anything: try again next second
            logging.warning("lease renewal failed: %s", e)
        time.sleep(1)


def main():
    kubeconfig, name, lease_namespace, lease_name = sys.argv[1:5]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    api_client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    renewer = threading.Thread(
        target=renew_forever,
        args=(api_client, lease_namespace, lease_name, name),
        daemon=True,
    )
    renewer.start()
    pods = SimpleResourceController(ResourceHandler.pod_handler(api_client), lambda pod: pod)
    controller = InitializerController(name, [pods])
    logging.info("initializer %s running", name)
    # The library's synchronous loop: list every uninitialized pod, handle those at our turn.
    while True:
        try:
            controller.handle_update()
        except Exception as e:  # a conflict with another writer: the next round re-reads
            logging.warning("round failed: %s", e)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
