"""Samples a cosmic-ray session: with KEEP < 1, marks as skipped the -1 twin of each NumberReplacer
mutant (its +1 twin stays) and a seeded random share 1 - KEEP of the other mutants; KEEP = 1 keeps all.

    python -m guide.mutate build/mutation/<module>.sqlite KEEP   (make mutate runs it)
"""
import random
import sys

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult

path, keep = sys.argv[1], float(sys.argv[2])
if keep < 1:
    rng = random.Random(0)
    with use_db(path, WorkDB.Mode.open) as db:
        for item in sorted(db.pending_work_items, key=lambda i: i.job_id):
            m = item.mutations[0]
            if m.operator_name == "core/NumberReplacer" and m.occurrence % 2 == 1:
                why = "NumberReplacer -1 twin"
            elif rng.random() >= keep:
                why = f"random sample, keep {keep}"
            else:
                continue
            db.set_result(item.job_id, WorkResult(output=f"sampled out: {why}", worker_outcome=WorkerOutcome.SKIPPED))
