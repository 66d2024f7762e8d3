"""The AWS provider: ``karpy run --cloud-provider aws`` launches EC2 instances for EC2NodeClass pools.

What each module does, in the order a NodeClaim meets them:

- :mod:`~karpy.cloud.aws.nodeclass_status` resolves every EC2NodeClass
  (:mod:`~karpy.cloud.aws.resolution`, with the pure selector semantics of
  :mod:`~karpy.cloud.aws.selectors`) into Karpenter's status: subnets, security
  groups, AMIs, instance profile and the conditions a NodePool's
  ``NodeClassReady`` and its pods' events repeat;
- :mod:`~karpy.cloud.aws.provider` is the cloud provider: instance types from
  the bundled catalog over the class' zones and AMIs, one CreateFleet per
  NodeClaim planned by :mod:`~karpy.cloud.aws.fleet` and run in the background
  by :mod:`~karpy.cloud.aws.launcher`, from launch templates
  (:mod:`~karpy.cloud.aws.launchtemplates`) whose user data
  :mod:`~karpy.cloud.aws.userdata` writes per AMI family;
- :mod:`~karpy.cloud.aws.pricing` refreshes prices every 12 hours;
- :mod:`~karpy.cloud.aws.interruption` reads the SQS queue of spot interruption
  warnings and instance events for the interruption controller.

Every AWS call goes through :mod:`~karpy.cloud.aws.client`, the one seam with
boto3; configuration is the SDK's own (region, credential chain,
``AWS_ENDPOINT_URL``) plus :mod:`~karpy.cloud.aws.settings`.
"""
