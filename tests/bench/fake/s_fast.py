# FAKE {"reward": 3, "speedup_eager": 2.0, "speedup_compile": 1.25, "peak_fraction": 0.4, "delay": 0.3}
