# FAKE {"infrastructure": true, "message": "the evaluator ran out of GPU memory", "delay": 0.3}
