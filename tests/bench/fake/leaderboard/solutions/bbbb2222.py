# FAKE {"reward": 1, "speedup_eager": 0.8, "speedup_compile": 0.5, "peak_fraction": 0.1, "delay": 0.3}
