"""The cost of Gemma's causal mask per forward pass, by max_position_embeddings, in whatever transformers the
interpreter has (run it with a sweep point's environment: `fwbench env path` or the venv folder's python).

The published finding: Gemma in HF Transformers became much faster from 4.38.1 to 4.38.2, the reported cause
a causal mask of max_position_embeddings x max_position_embeddings built every forward. `tiny`'s Gemma has 256
positions, which hides that; this builds the tiny Gemma with 256 and with 8192 positions (the real Gemma's, and
`small`'s and `paper`'s) and times a 32-token forward pass of each, so the difference is the mask's cost alone.

    python benchmarks/gemma_mask_cost.py [--repeats 30] [--threads 2]
Prints one JSON line: transformers' version and, per max_positions, the median ms per forward with a 95%
bootstrap interval.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--positions", default="256,8192")
    args = parser.parse_args()
    import torch
    import transformers
    from transformers import GemmaConfig, GemmaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "threads": args.threads}
    ids = torch.randint(1, 1024, (1, 32))
    rng = np.random.default_rng(0)
    for positions in (int(p) for p in args.positions.split(",")):
        config = GemmaConfig(vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=4, head_dim=16, intermediate_size=128,
                             max_position_embeddings=positions, pad_token_id=0)
        model = GemmaForCausalLM(config).eval()
        times = []
        with torch.inference_mode():
            for i in range(args.repeats + 3):
                start = time.perf_counter()
                model(ids)
                if i >= 3:  # warm-up
                    times.append((time.perf_counter() - start) * 1000)
        times = np.array(times)
        boot = np.median(rng.choice(times, (2000, times.size)), axis=1)
        out[f"ms_per_forward_{positions}"] = [round(float(np.median(times)), 3),
                                              round(float(np.percentile(boot, 2.5)), 3),
                                              round(float(np.percentile(boot, 97.5)), 3)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
