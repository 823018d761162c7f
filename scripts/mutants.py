#!/usr/bin/env python3
"""Mutation check of the update's and the statistics' key lines.

Each mutant is one small edit a plausible bug would make; the named test
must fail with it in place (the mutant is "killed"). The file is restored
whatever happens. Run from the repository root: `just mutants`.
"""
import subprocess
import sys

# (file, original text, mutated text, package, test regex, what the bug is)
MUTANTS = [
    ("trainer/rl.go",
     "dO = cfg.Lambda * t.dOPD / float64(nDistill)",
     "dO = cfg.Lambda * t.dOPD / float64(nTrain)",
     "./trainer", "TestDistillationMeansOverDistilledTokens",
     "distillation gradient divided by the trained tokens, not the distilled ones"),
    ("trainer/rl.go",
     "t.dOPD = -t.gate",
     "t.dOPD = -t.gate - t.gate*(1-t.gate)*cfg.Beta*t.delta",
     "./trainer", "TestRLStepGateCarriesNoGradient",
     "gradient through the gate (it must be held constant)"),
    ("trainer/rl.go",
     "\t\tcase termKL:\n\t\t\td, de = dK, 0",
     "\t\tcase termKL:\n\t\t\td, de = dO, 0",
     "./trainer", "TestTermGradsMatchEachTermAlone",
     "per-term gradients: the KL pass carries the distillation term"),
    ("trainer/rl.go",
     "t.dOPD = -dc",
     "t.dOPD = dc",
     "./trainer", "TestRLStepSignedDistillation",
     "signed distillation pushing the teacher's rejected tokens up"),
    ("benchmarks/paired.go",
     "seeds[i] = r.IntN(k)",
     "seeds[i] = i",
     "./benchmarks", "TestPairedBootstrapResamplesSeeds",
     "paired bootstrap no longer resamples seeds"),
    ("inference/backend.go",
     "worst = math.Max(worst, math.Abs(got[0][k]-want[k]))",
     "worst = math.Max(worst, got[0][k]-want[k])",
     "./inference", "TestVerifyServedIsTwoSided",
     "stale-weights check one-sided"),
    ("skills/teacher.go",
     "out[perm[i]] = sks[perm[(i+1)%len(perm)]]",
     "out[i] = sks[(i+1)%len(sks)]",
     "./skills", "TestShuffleCrossesGroups",
     "random-skill baseline hands each trajectory its neighbour's (a groupmate's) skill"),
    ("trainer/rl.go",
     "t.delta = float64(s.TeacherLogP[k] - s.BaselineLogP[k])",
     "t.delta = float64(s.TeacherLogP[k]) - lp",
     "./trainer", "TestTermsAtHandComputed",
     "contrastive gap ignoring its baseline (ℓᵀ − ℓθ instead of ℓᵀ − ℓᴮ)"),
    ("trainer/distill.go",
     "\tcase 1:\n\t\treturn kl(lp, lqT)",
     "\tcase 1:\n\t\treturn kl(lqT, lp)",
     "./trainer", "TestFullDistillMatchesTorch/whole-vocab$",
     "full-distribution distillation's reverse KL computed as the forward one"),
    ("trainer/distill.go",
     "gotch.Float, true)), -1, true), 1, true)",
     "gotch.Float, true)), 0, true), 1, true)",
     "./trainer", "TestFullDistillMatchesTorch/top8$",
     "top-k distillation's tail bucket holding all the mass"),
    ("trainer/distill.go",
     "a := mulScalar(kl(lqT, lm), beta, true)",
     "a := mulScalar(kl(lm, lqT), beta, true)",
     "./trainer", "TestFullDistillMatchesTorch/jsd0.5-whole",
     "generalized JSD's teacher half reversed"),
    ("orchestrator/rows.go",
     "out[sp.PlainStart+j] = ds[sp.TeacherStart+j]",
     "out[sp.PlainStart+j] = ds[sp.PlainStart+j]",
     "./orchestrator", "TestFullDistillRowsCarryAlignedDistributions",
     "teacher distributions read at the plain position, not the teacher's"),
    ("skills/teacher.go",
     "if has[j] && task[j] != task[i] {",
     "if has[j] && j != i {",
     "./skills", "TestDonors",
     "contrastive donors drawn from the same task"),
]


def main() -> int:
    survived = 0
    for path, old, new, pkg, test, what in MUTANTS:
        with open(path, encoding="utf-8") as f:
            src = f.read()
        if src.count(old) != 1:
            print(f"STALE  {path}: the original text occurs {src.count(old)} times (update scripts/mutants.py): {old!r}")
            survived += 1
            continue
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(src.replace(old, new))
            r = subprocess.run(["go", "test", "-count=1", "-run", "^" + test + "$", pkg],
                               capture_output=True, text=True, timeout=900)
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(src)
        if r.returncode == 0:
            print(f"SURVIVED  {what}: {pkg} {test} passes with {path} mutated")
            survived += 1
        elif "FAIL" not in r.stdout + r.stderr or "build failed" in r.stdout + r.stderr:
            print(f"BROKEN  {what}: the mutant does not build or the test did not run:\n{r.stdout}{r.stderr}")
            survived += 1
        else:
            print(f"killed  {what} ({test})")
    print(f"{len(MUTANTS) - survived} of {len(MUTANTS)} mutants killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
