"""karpy: a Kubernetes node autoscaler that speaks Karpenter's API."""

__version__ = "0.1.0"
