"""Fake nodes for a real control plane without a container runtime.

Nodes annotated ``kwok.x-k8s.io/node: fake`` are kept Ready, and the pods bound to
them are reported Running, by :mod:`karpy.cloud.kwok.fake_kubelet` (run it with
``python -m karpy.cloud.kwok.fake_kubelet``).
"""
