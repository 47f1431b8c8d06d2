"""The built-in coding environment's pieces that live with the environment rather than in a layer
that must not know it: for now, its scripted player (`rollout_dataset.envs.coding.policy`, which
registers the local backend's `oracle` policy with the built-in task lookup injected)."""
