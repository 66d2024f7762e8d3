"""Benchmarks of the scheduling core: how fast ``solve`` plans, how cheap its plans are, how much memory.

The issue behind them asks for scheduling at ten times Karpenter's speed
and near-optimal cost. Neither claim means anything without a fixed
yardstick, so this package pins three down:

- speed on *Karpenter's own benchmark inputs* (``workloads``), so the
  figures can be set beside the ones Karpenter's Go benchmark prints, with
  every plan checked for broken topology constraints (``checks``), since
  ignoring them is the easiest way to be fast;
- speed and memory on the real AWS catalog with a realistic mix of pods, at
  up to 50,000 pods;
- cost against LP lower bounds that no plan can beat (``lower_bound``), so
  "near-optimal" is a measured gap rather than a feeling.

``measure`` runs one case in a fresh process, ``report`` prints the tables
and judges the targets, ``__main__`` is the command line.
"""
