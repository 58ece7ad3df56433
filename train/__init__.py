"""cuda-agent's RL trainer: the paper's staged PPO recipe (DESIGN.md §1) on PyTorch, driving
`cuda-agent serve` through MCP. See train/README.md."""
