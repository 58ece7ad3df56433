# FAKE {"reward": -1, "stage": "verify", "message": "output mismatch", "delay": 0.3}
