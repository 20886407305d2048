import os

import torch
from hypothesis import settings

torch.set_num_threads(int(os.environ.get("LMPO_TEST_THREADS", "2")))
settings.register_profile("lmpo", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("lmpo")
