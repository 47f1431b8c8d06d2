"""The built-in environments, each a self-contained recipe package over the seam (`rollout_dataset.envs`).

`coding/` (a task set, a harness in the sandbox, a verifier) and `crafter/` (the game through an
`act` tool). Each owns its configuration, its scripted player, its CLI flags and everything only
it uses; neither imports the other, and nothing below the command line imports either: the
pipeline and the batch get them from the registry (`rollout_dataset.envs.registry`).
"""
