# A real node for the test bed (`tests/testbed/up DIR --node`), sourced by up, down and
# crash (not run). containerd (Debian's, with runc and the CNI plugins) and a kubelet of the
# bed's version, joined as TESTBED_NODE, in the host's mount namespace: a hostPath is the
# path the tests see. Everything they change on the host is recorded first
# (DIR/node/host.before) and undone by node_down. README "Test bed: a real node" says why
# each setting is what it is.
#
# The caller defines `fail MESSAGE`, `timeout_s`, `dir`, `bin`, `pki`, `here`, `repo`.

NODE_NAME=testbed-kubelet
NODE_BRIDGE=igtb0
NODE_IP=10.244.0.1
NODE_SUBNET=10.244.0.0/24
NODE_CGROUP_ROOT=/initguard-testbed
# One node bed at a time (the kubelet's device-plugin socket, /run/containerd/s and the
# static pod's host ports are fixed): this directory names the bed that holds the host.
NODE_LOCK=/run/initguard-testbed-node
# What the kubelet and containerd write to on every version, whatever their settings.
NODE_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
# Each removed on the way down when it was absent before; the last four are made by
# containerd (its opt plugin), the CNI plugins (network namespaces), mount(8) (utab) and
# skopeo/umoci, and exist only once a node ran on the machine (a fresh one has none).
NODE_PATHS=(/var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods /run/containerd
  /etc/cni /etc/initguard /opt/containerd /run/netns /run/mount /var/lib/containers)
NODE_IMAGES=(initguard.test/pause:1 initguard.test/busybox:1 initguard.test/initguard:dev)

node_requirements() {
  local missing=() c
  [ "$(id -u)" = 0 ] || fail "--node needs root (the kubelet, containerd and the CNI bridge)"
  for c in containerd containerd-shim-runc-v2 ctr runc umoci skopeo busybox gcc iptables \
      iptables-save ip; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  [ -x /usr/lib/cni/bridge ] || missing+=(/usr/lib/cni/bridge)
  [ ${#missing[@]} -eq 0 ] || fail "--node needs ${missing[*]} (Debian: containerd runc \
containernetworking-plugins umoci skopeo busybox-static gcc iptables iproute2; .ci/run installs them)"
  [ -x "$bin/kubelet" ] || fail "no kubelet in $bin: run tests/testbed/build --version $version"
}

# Takes the host for this bed, or fails naming the bed that holds it.
node_lock() {
  if ! mkdir "$NODE_LOCK" 2>/dev/null; then
    local other
    other="$(cat "$NODE_LOCK/dir" 2>/dev/null || true)"
    if [ -n "$other" ] && compgen -G "$other/pids/*.pid" >/dev/null; then
      fail "another node bed holds this host ($other): node beds never run concurrently"
    fi
    # A bed that is gone (its pid files removed) left the lock behind.
    rm -rf "$NODE_LOCK"
    mkdir "$NODE_LOCK" || fail "cannot take $NODE_LOCK"
  fi
  echo "$dir" >"$NODE_LOCK/dir"
}

# Records what node_down must put back: the sysctls' values and which fixed paths existed.
node_record_host() {
  local s p
  mkdir -p "$dir/node"
  : >"$dir/node/host.before"
  for s in "${NODE_SYSCTLS[@]}"; do
    echo "sysctl $s $(cat "/proc/sys/${s//.//}")" >>"$dir/node/host.before"
  done
  for p in "${NODE_PATHS[@]}"; do
    [ -e "$p" ] || [ -L "$p" ] || echo "absent $p" >>"$dir/node/host.before"
  done
  ls /run/netns 2>/dev/null >"$dir/node/netns.before" || true
}

# The pods' bridge, before the API server starts: the server listens on its address, which
# the `kubernetes` Service advertises to pods.
node_network() {
  if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    fail "bridge $NODE_BRIDGE already exists (a bed that was not taken down?)"
  fi
  ip link add "$NODE_BRIDGE" type bridge
  echo "$NODE_BRIDGE" >"$dir/node/bridge"
  ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
}

# A container image from a root filesystem: NAME ROOTFS USER ENTRYPOINT CMD [PORT...]
# (ENTRYPOINT and CMD: words separated by spaces, or - for none), as an archive in DIR/node/images, imported into containerd by node_images.
node_image() {
  local name="$1" rootfs="$2" user="$3" entrypoint="$4" cmd="$5"; shift 5
  local work="$dir/node/images/work" args=() p
  rm -rf "$work"
  mkdir -p "$work"
  umoci init --layout "$work/oci" >/dev/null
  umoci new --image "$work/oci:img" >/dev/null
  umoci unpack --image "$work/oci:img" "$work/bundle" >/dev/null
  cp -a "$rootfs/." "$work/bundle/rootfs/"
  umoci repack --image "$work/oci:img" "$work/bundle" >/dev/null
  args=(--config.user "$user")
  # umoci takes one flag per word of the entrypoint and command.
  local word
  if [ "$entrypoint" != - ]; then for word in $entrypoint; do args+=(--config.entrypoint "$word"); done; fi
  if [ "$cmd" != - ]; then for word in $cmd; do args+=(--config.cmd "$word"); done; fi
  for p in "$@"; do args+=(--config.exposedports "$p"); done
  umoci config --image "$work/oci:img" "${args[@]}" >/dev/null
  local archive="$dir/node/images/${name//[\/:]/_}.tar"
  NODE_IMAGE_ARCHIVE="$archive"
  skopeo copy -q "oci:$work/oci:img" "docker-archive:$archive:$name" >/dev/null
  rm -rf "$work"
}

# The shared libraries BINARY links (the loader among them), copied into ROOT at their paths.
node_libs() { # ROOT BINARY
  local lib
  for lib in $(ldd "$2" | grep -o '/[^ ]*'); do
    mkdir -p "$1$(dirname "$lib")"
    cp -L "$lib" "$1$lib"
  done
}

# busybox (Debian's busybox-static, statically linked) in ROOT: a shell, coreutils, httpd.
node_busybox() { # ROOT
  local applet
  mkdir -p "$1/bin" "$1/tmp" "$1/etc"
  cp "$(command -v busybox)" "$1/bin/busybox"
  for applet in $("$1/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$1/bin/$applet"
  done
  chmod 1777 "$1/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$1/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$1/etc/group"
}

# Imports an image archive of node_image into the bed's containerd.
node_import() { # ARCHIVE
  node_ctr images import "$1" >>"$dir/logs/setup.log" 2>&1 \
    || fail "ctr images import $1 failed (logs/setup.log)"
}

# The three local images (no registry: built here and imported into containerd).
node_build_images() {
  local root="$dir/node/images/rootfs"
  rm -rf "$dir/node/images"
  mkdir -p "$root"
  # The sandbox: a static program that waits for SIGTERM.
  cat >"$dir/node/images/pause.c" <<'EOF'
#include <signal.h>
#include <unistd.h>
static void done(int sig) { (void)sig; _exit(0); }
int main(void) {
  signal(SIGTERM, done);
  signal(SIGINT, done);
  for (;;) pause();
}
EOF
  mkdir -p "$root/pause"
  gcc -static -O2 -s -o "$root/pause/pause" "$dir/node/images/pause.c"
  node_image initguard.test/pause:1 "$root/pause" 65535:65535 /pause -

  # busybox (Debian's busybox-static, statically linked): a shell, coreutils, httpd; root.
  local bb="$root/busybox"
  node_busybox "$bb"
  node_image initguard.test/busybox:1 "$bb" 0:0 - '/bin/sh'

  # initguard: the shipped binary in deploy/Dockerfile's layout on what distroless cc gives
  # (the loader and the libraries it links, CA certificates, the nonroot user).
  local ig="$root/initguard" lib
  local guard="$repo/target/dist/initguard"
  [ -x "$guard" ] || fail "no $guard: cargo build --profile dist --no-default-features --bin initguard"
  mkdir -p "$ig/etc/ssl/certs" "$ig/tmp" "$ig/home/nonroot"
  cp "$guard" "$ig/initguard"
  node_libs "$ig" "$guard"
  [ ! -f /etc/ssl/certs/ca-certificates.crt ] || cp /etc/ssl/certs/ca-certificates.crt "$ig/etc/ssl/certs/"
  chmod 1777 "$ig/tmp"
  chown 65532:65532 "$ig/home/nonroot"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ig/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ig/etc/group"
  node_image initguard.test/initguard:dev "$ig" 65532:65532 /initguard \
    'run --config /etc/initguard/config.yaml' 9777/tcp 9778/tcp
  rm -rf "$root"
}

node_ctr() { ctr --address "$dir/node/containerd/containerd.sock" --namespace k8s.io "$@"; }

node_containerd() {
  local c="$dir/node/containerd"
  mkdir -p "$c/root" "$c/state" "$dir/node/cni/net.d" "$dir/node/cni/ipam"
  cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[debug]
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "initguard.test/pause:1"
  # Root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj is refused (runc then fails
  # every sandbox with "can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/node/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
EOF
  # The bridge the API server already listens on; addresses from a range of its own.
  cat >"$dir/node/cni/net.d/10-testbed.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "initguard-testbed",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/node/cni/ipam",
        "ranges": [[{ "subnet": "$NODE_SUBNET", "rangeStart": "10.244.0.10", "rangeEnd": "10.244.0.250", "gateway": "$NODE_IP" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "loopback" }
  ]
}
EOF
  printf '%q ' containerd --config "$c/config.toml" >"$dir/cmd/containerd.args"
  containerd --config "$c/config.toml" </dev/null >>"$dir/logs/containerd.log" 2>&1 &
  echo $! >"$dir/pids/containerd.pid"
  wait_for "containerd on $c/containerd.sock" "$dir/logs/containerd.log" node_ctr version
  local image
  for image in "$dir"/node/images/*.tar; do node_import "$image"; done
  # The list first: `grep -q` would close the pipe on ctr (pipefail).
  local listed
  listed="$(node_ctr images ls -q)"
  for image in "${NODE_IMAGES[@]}"; do
    grep -qx "docker.io/$image\|$image" <<<"$listed" \
      || fail "image $image missing in containerd after import (it lists: $listed)"
  done
}

# A client certificate from the bed's CA: NAME CN [O].
node_client_cert() {
  local name="$1" cn="$2" o="${3:-}" subj="/CN=$2"
  [ -z "$o" ] || subj="/O=$o/CN=$cn"
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 7 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
}

# The API server's client certificate towards kubelets (logs, exec, port-forward), bound
# to system:kubelet-api-admin once RBAC is up (node_kubelet).
node_apiserver_pki() {
  node_client_cert kubelet-client kube-apiserver-kubelet-client
}

# The kubelet, joined as NODE_NAME with its own node credentials (Node authorizer).
node_kubelet() {
  local k="$dir/node/kubelet" p_kubelet="$1" p_healthz="$2" minor="$3"
  mkdir -p "$k/pki" "$dir/node/manifests" "$dir/node/pod-logs"
  "$bin/kubectl" "${admin[@]}" create clusterrolebinding testbed-kubelet-api-admin \
    --clusterrole system:kubelet-api-admin --user kube-apiserver-kubelet-client >>"$dir/logs/setup.log" 2>&1
  node_client_cert node "system:node:$NODE_NAME" system:nodes
  cat >"$k/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster: { server: "$server", certificate-authority: "$pki/ca.crt" }
users:
- name: node
  user: { client-certificate: "$pki/node.crt", client-key: "$pki/node.key" }
contexts:
- name: testbed
  context: { cluster: testbed, user: node }
current-context: testbed
EOF
  # cgroup v1 here: the kubelet's root cgroup must exist in every hierarchy beforehand.
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h" ] && [ ! -L "${h%/}" ] || continue
    mkdir -p "$h${NODE_CGROUP_ROOT#/}"
  done
  cat >"$k/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $p_kubelet
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $p_healthz
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: "$pki/ca.crt" }
authorization: { mode: Webhook }
containerRuntimeEndpoint: unix://$dir/node/containerd/containerd.sock
staticPodPath: $dir/node/manifests
fileCheckFrequency: 2s
syncFrequency: 10s
cgroupDriver: cgroupfs
cgroupRoot: $NODE_CGROUP_ROOT
# cgroup v1 on this machine: kubelet 1.35+ exits without this.
failCgroupV1: false
failSwapOn: false
# No registry: a collected image is gone for good; and a fuller disk must not evict.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: { memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%" }
podLogsDir: $dir/node/pod-logs
resolvConf: ""
maxPods: 110
serializeImagePulls: false
registerNode: true
EOF
  local args=(--config "$k/config.yaml" --kubeconfig "$k/kubeconfig" --root-dir "$k/root"
    --cert-dir "$k/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" -v 1)
  printf '%q ' "${args[@]}" >"$dir/cmd/kubelet.args"
  "$bin/kubelet" "${args[@]}" </dev/null >>"$dir/logs/kubelet.log" 2>&1 &
  echo $! >"$dir/pids/kubelet.pid"
  printf '%q ' "http://127.0.0.1:$p_healthz/healthz" >"$dir/cmd/kubelet.health"
  wait_for "the kubelet's /healthz on 127.0.0.1:$p_healthz" "$dir/logs/kubelet.log" \
    healthy "http://127.0.0.1:$p_healthz/healthz"
  node_ready() {
    [ "$("$bin/kubectl" "${admin[@]}" get node "$NODE_NAME" \
      -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
  }
  wait_for "node $NODE_NAME Ready" "$dir/logs/kubelet.log" node_ready
}

# Pods reach the API server as on a real cluster: the `kubernetes` Service's address,
# 10.0.0.1:443, is rewritten on the bridge to the address the server advertises.
# Never towards 127.0.0.0/8, and only for packets that come in on the bridge.
node_route_service() {
  local port="$1"
  iptables -t nat -A PREROUTING -i "$NODE_BRIDGE" -d 10.0.0.1/32 -p tcp --dport 443 \
    -m comment --comment "initguard-testbed $dir" -j DNAT --to-destination "$NODE_IP:$port"
  echo "-t nat -D PREROUTING -i $NODE_BRIDGE -d 10.0.0.1/32 -p tcp --dport 443 -m comment --comment initguard-testbed\\ $dir -j DNAT --to-destination $NODE_IP:$port" \
    >"$dir/node/iptables.added"
}

# --- node_stop, node_restore_host (tests/testbed/down): every step tolerates what is
# already gone (down may run twice).

# Every process whose /proc/PID/cmdline contains STRING.
node_pids_with() {
  local p
  for p in /proc/[0-9]*; do
    # A process may end meanwhile (errors to /dev/null first); grep reads all (pipefail).
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -F -- "$1" >/dev/null && echo "${p#/proc/}"
  done
  return 0
}

# Every process in the kubelet's cgroups (the containers), in any v1 hierarchy.
node_cgroup_pids() {
  local f
  for f in /sys/fs/cgroup/*"$NODE_CGROUP_ROOT"/; do
    [ -d "$f" ] || continue
    find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u
}

# The containers, containerd and what they mounted; the kubelet is already stopped.
node_stop() {
  local nd="$dir/node" sock="$dir/node/containerd/containerd.sock" pid i
  [ -d "$nd" ] || return 0
  # The containers, while containerd still answers.
  if [ -S "$sock" ]; then
    for i in $(node_ctr tasks ls -q 2>/dev/null); do
      node_ctr tasks kill -s SIGKILL "$i" >/dev/null 2>&1
    done
  fi
  stop containerd
  # Shims outlive their tasks and containerd; anything left in the pods' cgroups too.
  for pid in $(node_pids_with "-address $sock") $(node_cgroup_pids); do
    kill -KILL "$pid" 2>/dev/null
  done
  for i in $(seq 50); do
    [ -z "$(node_pids_with "-address $sock")$(node_cgroup_pids)" ] && break
    sleep 0.1
  done
  # Mounts under the bed's and the fixed paths, deepest first.
  local m
  for m in $(awk '{print $5}' /proc/self/mountinfo | grep -E "^($dir|/var/lib/kubelet|/run/containerd)(/|$)" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  # The pods' network namespaces (containerd never ran the CNI plugin's DEL for sandboxes
  # killed this way): deleting one removes its veth pair.
  local ns
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    grep -qx "${ns##*/}" "$nd/netns.before" 2>/dev/null && continue
    ip netns delete "${ns##*/}" 2>/dev/null
  done
  # The kubelet's cgroups, leaves first.
  local h
  for h in /sys/fs/cgroup/*"$NODE_CGROUP_ROOT"; do
    [ -d "$h" ] || continue
    find "$h" -depth -type d -exec rmdir {} + 2>/dev/null
  done
}

# The host as it was: the DNAT rule, the kubelet's iptables chains, the bridge, the sysctls,
# the fixed paths; after the control plane stopped (the API server's last writes, as it shuts
# down, go to its advertise address on the bridge).
node_restore_host() {
  local nd="$dir/node"
  [ -d "$nd" ] || return 0
  if [ -f "$nd/iptables.added" ]; then
    # shellcheck disable=SC2046
    eval iptables $(cat "$nd/iptables.added") 2>/dev/null
    rm -f "$nd/iptables.added"
  fi
  # Chains the kubelet made (KUBE-FIREWALL and its hints) that were not there before.
  node_iptables_cleanup
  if [ -f "$nd/bridge" ]; then
    ip link del "$(cat "$nd/bridge")" 2>/dev/null
    rm -f "$nd/bridge"
  fi
  if [ -f "$nd/host.before" ]; then
    local kind key value
    while read -r kind key value; do
      case "$kind" in
        sysctl) echo "$value" >"/proc/sys/${key//.//}" 2>/dev/null ;;
        absent) rm -rf "$key" ;;
      esac
    done <"$nd/host.before"
    rm -f "$nd/host.before"
  fi
  if [ "$(cat "$NODE_LOCK/dir" 2>/dev/null)" = "$dir" ]; then rm -rf "$NODE_LOCK"; fi
}

node_iptables_cleanup() {
  [ -f "$dir/node/iptables.before" ] || return 0
  local table chain line new
  for table in filter nat mangle; do
    new=()
    for chain in $(iptables-save -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[A-Z0-9-]*\) .*/\1/p'); do
      grep -qx "$table $chain" "$dir/node/iptables.before" || new+=("$chain")
    done
    [ ${#new[@]} -gt 0 ] || continue
    # Rules in the older chains that jump to a new one, then the new chains themselves.
    for chain in "${new[@]}"; do
      iptables-save -t "$table" | grep -E "^-A [^ ]+ .*-j $chain( |$)" | while read -r line; do
        eval iptables -t "$table" "${line/-A /-D }" 2>/dev/null
      done
    done
    for chain in "${new[@]}"; do iptables -t "$table" -F "$chain" 2>/dev/null; done
    for chain in "${new[@]}"; do iptables -t "$table" -X "$chain" 2>/dev/null; done
  done
  rm -f "$dir/node/iptables.before"
}

node_record_iptables() {
  local table
  for table in filter nat mangle; do
    iptables-save -t "$table" 2>/dev/null | sed -n "s/^:\([^ ]*\) .*/$table \1/p"
  done >"$dir/node/iptables.before"
}
