"""Helpers of benchmarks/mutation.sh around cosmic-ray session databases.

    python crtool.py sample DB N SEED         keep N random pending mutants, skip the rest
    python crtool.py rerun-survivors DB       forget the results of surviving mutants
    python crtool.py only DB JOB_ID...        skip every pending mutant but these
    python crtool.py truncate DB REASON       record every pending mutant as unsampled
    python crtool.py exec-until CFG DB MIN    `cosmic-ray exec`, stopping after MIN minutes
    python crtool.py summary OUT DB...        per-module counts + report.md + survivors.txt

Counts: ``killed`` includes ``timeout`` (cosmic-ray scores a run past the time limit as
killed; listed apart here), ``incompetent`` mutants (the mutated file could not be run at
all) are left out of the score, and ``filtered`` (excluded operator) and ``unsampled`` (not
drawn by --sample) ones were never run.  Score = killed / (killed + survived).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult


def _open(path):
    return use_db(path, mode=WorkDB.Mode.open)


def sample(db_path, n, seed):
    with _open(db_path) as db:
        pending = sorted(item.job_id for item in db.pending_work_items)
        rng = random.Random(int(seed))
        keep = set(rng.sample(pending, min(int(n), len(pending))))
        drop = [job for job in pending if job not in keep]
        db.set_multiple_results(
            drop,
            WorkResult(
                output=f"not sampled (seed {seed}, {len(keep)} of {len(pending)} kept)",
                worker_outcome=WorkerOutcome.SKIPPED,
            ),
        )
    print(f"sampled {len(keep)} of {len(pending)} mutants (seed {seed})")


def only(db_path, jobs):
    jobs = set(jobs)
    with _open(db_path) as db:
        pending = [item.job_id for item in db.pending_work_items]
        drop = [job for job in pending if job not in jobs]
        db.set_multiple_results(
            drop, WorkResult(output="not selected", worker_outcome=WorkerOutcome.SKIPPED)
        )
    print(f"kept {len(pending) - len(drop)} selected mutants")


def exec_until(config_path, db_path, minutes):
    """The local distributor's loop (cosmic-ray's mutate_and_test on each pending mutant, in
    the random order of ``pending_work_items``), no new mutant started after the deadline."""
    from cosmic_ray.config import load_config
    from cosmic_ray.mutating import mutate_and_test

    cfg = load_config(config_path)
    deadline = time.monotonic() + 60.0 * float(minutes)
    done = 0
    with _open(db_path) as db:
        for item in db.pending_work_items:
            if time.monotonic() >= deadline:
                break
            result = mutate_and_test(item.mutations, cfg.test_command, cfg.timeout)
            db.set_result(item.job_id, result)
            done += 1
    print(f"ran {done} mutants in at most {minutes} minutes")


def truncate(db_path, reason):
    with _open(db_path) as db:
        pending = [item.job_id for item in db.pending_work_items]
        db.set_multiple_results(
            pending,
            WorkResult(output=f"not sampled ({reason})", worker_outcome=WorkerOutcome.SKIPPED),
        )
    print(f"{len(pending)} pending mutants recorded as unsampled ({reason})")


def rerun_survivors(db_path):
    from cosmic_ray.work_db import WorkResultStorage

    with _open(db_path) as db:
        with db._session_maker.begin() as session:  # no public API to forget a result
            n = (
                session.query(WorkResultStorage)
                .filter(WorkResultStorage.test_outcome == TestOutcome.SURVIVED)
                .delete()
            )
    print(f"{n} survivors of {db_path} will be run again")


def _classify(result):
    if result.worker_outcome == WorkerOutcome.SKIPPED:
        return "filtered" if result.output == "Filtered operator" else "unsampled"
    if result.worker_outcome == WorkerOutcome.NO_TEST:
        return "no-test"
    if result.test_outcome == TestOutcome.SURVIVED:
        return "survived"
    if result.test_outcome == TestOutcome.KILLED:
        return "timeout" if result.output == "timeout" else "killed"
    return "incompetent"


def _module_name(db_path):
    return Path(db_path).stem


def summary(out_dir, db_paths):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = ["killed", "timeout", "survived", "incompetent", "filtered", "unsampled", "pending"]
    rows, survivors = [], []
    for db_path in db_paths:
        counts = dict.fromkeys(keys, 0)
        with _open(db_path) as db:
            done = db.completed_work_items
            counts["pending"] = db.num_work_items - len(done)
            for item, result in done:
                kind = _classify(result)
                counts[kind if kind in counts else "incompetent"] += 1
                if kind == "survived":
                    m = item.mutations[0]
                    survivors.append((_module_name(db_path), item.job_id, m, result.diff))
        rows.append((_module_name(db_path), counts))

    total = dict.fromkeys(keys, 0)
    for _, counts in rows:
        for k in keys:
            total[k] += counts[k]
    rows.append(("TOTAL", total))

    def score(c):
        dead = c["killed"] + c["timeout"]
        run = dead + c["survived"]
        return f"{100.0 * dead / run:.1f}%" if run else "-"

    header = f"{'module':<14}" + "".join(f"{k:>12}" for k in keys) + f"{'score':>9}"
    lines = [header, "-" * len(header)]
    for name, c in rows:
        lines.append(f"{name:<14}" + "".join(f"{c[k]:>12}" for k in keys) + f"{score(c):>9}")
    table = "\n".join(lines)
    print(table)

    md = ["# Mutation testing report (cosmic-ray)", "", "```", table, "```", ""]
    md.append("Score = (killed + timeout) / (killed + timeout + survived).")
    md.append(f"{len(survivors)} survivors:")
    md.append("")
    text = []
    for module, job, m, diff in survivors:
        where = f"{m.module_path}:{m.start_pos[0]} {m.operator_name} #{m.occurrence}"
        md.append(f"- `{module}` `{job}` {where}")
        text.append(f"=== {module} {job} {where} ({m.definition_name})\n{diff}\n")
    (out_dir / "report.md").write_text("\n".join(md) + "\n")
    (out_dir / "survivors.txt").write_text("\n".join(text))
    print(f"\nreport: {out_dir / 'report.md'}\nsurvivor diffs: {out_dir / 'survivors.txt'}")


def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "sample":
        sample(*args)
    elif cmd == "rerun-survivors":
        rerun_survivors(*args)
    elif cmd == "exec-until":
        exec_until(*args)
    elif cmd == "truncate":
        truncate(args[0], " ".join(args[1:]))
    elif cmd == "only":
        only(args[0], args[1:])
    elif cmd == "summary":
        summary(args[0], args[1:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
