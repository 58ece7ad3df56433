# FAKE {"reward": 1, "speedup_eager": 1.0, "speedup_compile": 0.5, "peak_fraction": 0.2, "delay": 0.3}
