"""One process of the distributed parity test (``tests/test_distributed.py``); run alone or under torchrun.

    python tests/dist_worker.py OUT [--world 1]                      # the 1-process reference
    torchrun --standalone --nproc_per_node 2 tests/dist_worker.py OUT  # 2 processes, gloo on the CPU

For each case of :data:`CASES` it builds the trainer with ``grpo_lessons.integrations.trl_train.build_trainer`` (the
documented entry point), trains one optimizer step, and process 0 writes the weights before and after
the step and the dynamic-sampling counters to ``OUT/<case>/``.

Generation is replaced by a deterministic function of the prompt and of the completion's place in its
group (:func:`fake_completion`): TRL seeds each process's sampler differently (``set_seed(seed,
device_specific=True)``), so sampled completions cannot match across world sizes.  Everything after
generation is TRL's and the package's own code: tokenisation, rewards, advantages, dynamic sampling,
log-probs, the loss, DDP's gradient all-reduce and the optimizer.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import torch

from grpo_lessons.integrations.trl_bridge import GRPOLessonsTrainer
from grpo_lessons.integrations.trl_train import build_trainer

G = 4
GLOBAL_BATCH = 12  # 3 groups of 4: with 2 processes of 6 rows, the middle group straddles the processes
COMMON = ["--seed", "5", "--max-steps", "1", "--num-generations", str(G), "--no-save", "--learning-rate", "0.5",
          "--set", "optim=sgd", "--set", "max_grad_norm=0", "--set", "logging_steps=1"]
CASES = {
    "grpo": ["--variant", "grpo", "--set", "beta=0.04"],
    "dapo_dynamic": ["--variant", "dapo", "--dynamic-sampling", "--max-sampling-rounds", "3"],
}
_QUESTION = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")


def fake_completion(prompt_text: str, j: int) -> str:
    """Completion number ``j`` of a group, from the prompt alone: all right, all wrong, or mixed by prompt."""
    m = _QUESTION.search(prompt_text)
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    right = a + b if op == "+" else a - b if op == "-" else a * b
    kind = (a + b) % 4  # 0: all right, 1: all wrong (both uninformative), 2 and 3: right on even j
    ok = kind == 0 or (kind >= 2 and j % 2 == 0)
    return "so " * (j % 3) + f"The answer is {right if ok else right + 1}."


def _fake_generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
    rank, n_local = self.accelerator.process_index, len(prompt_ids)
    tok = self.processing_class
    out = []
    for i, ids in enumerate(prompt_ids):
        j = (rank * n_local + i) % num_generations  # place in the group, from the global row index
        out.append(tok.encode(fake_completion(tok.decode(ids), j)) + [tok.eos_token_id])
    return out, None


def run(out: Path, world: int) -> None:
    GRPOLessonsTrainer._generate_single_turn = _fake_generate_single_turn
    for name, extra in CASES.items():
        case_dir = out / name
        argv = ["--output-dir", str(case_dir), "--per-device-train-batch-size", str(GLOBAL_BATCH // world),
                *COMMON, *extra]
        trainer, _ = build_trainer(argv)
        model = trainer.accelerator.unwrap_model(trainer.model)
        before = {k: v.detach().clone() for k, v in model.state_dict().items()}
        trainer.train()
        if trainer.accelerator.is_main_process:
            trained = trainer.accelerator.unwrap_model(trainer.model)
            after = {k: v.detach().clone() for k, v in trained.state_dict().items()}
            torch.save({"before": before, "after": after}, case_dir / "weights.pt")
            logs = [h for h in trainer.state.log_history if "loss" in h]
            (case_dir / "log.json").write_text(json.dumps({"world": trainer.accelerator.num_processes, "log": logs}))
        trainer.accelerator.wait_for_everyone()
        del trainer


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    run(out_dir, world)
