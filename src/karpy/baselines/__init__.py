"""Other autoscalers' policies, modelled on karpy's data so runs can be compared on one simulated cluster."""
