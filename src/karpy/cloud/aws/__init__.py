"""The AWS provider, first part: resolving an EC2NodeClass against an AWS account.

What exists so far is resolution only: an EC2NodeClass' subnet, security group
and AMI selector terms and its role or instance profile become the status
Karpenter writes (:mod:`karpy.cloud.aws.resolution`), through one small client
class that makes every AWS call (:mod:`karpy.cloud.aws.client`). The selector
semantics are pure code (:mod:`karpy.cloud.aws.selectors`), testable without
the SDK.

Nothing here launches instances, and ``karpy run`` does not use it yet: it
still serves KWOKNodeClass pools only, and says an EC2NodeClass is not served.
"""
