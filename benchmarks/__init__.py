"""The project's benchmarks: scripts that print figures, never tests.

One entry point per area, each with its parts (``python -m benchmarks AREA PART --help``):

- ``alignment``: the anchor alignment on clustered embeddings, RANSAC's breakdown, the
  exact-target floor of d_G, the SVD shapes of RANSAC's fits;
- ``training``: where a step's time goes, peak memory against n, seeds trained together;
- ``reference``: the whole-set reference's time and memory against n;
- ``jobs``: one small job's overhead, concurrent jobs on one host, a finished workflow's
  time per stage;
- ``studies``: the feature-change study over seeds, SpecNet2's budget sweep;
- ``peers``: this project's SpectralNet beside the maintained ``spectralnet`` package;
- ``device``: the device gate, the paper-scale check and the shared-GPU check, each one
  call on a GPU box (settings as environment variables).

``python -m basis bench step|reference`` (the step and the reference timed in one process)
and ``python -m basis.cli.projection`` (a config's wall time from its DAG) complete them.
BENCHMARKS.md at the top of the checkout holds each benchmark's command, machine and figure.
"""
