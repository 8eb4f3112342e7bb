"""What ships: the wheel, the Docker image, the Kubernetes manifests, the import layers."""
