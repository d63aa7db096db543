//! Simulated Kubernetes API server and controllers: a test double for a real cluster.
