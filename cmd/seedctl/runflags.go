package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/orchestrator"
)

// configFlag is a `seedctl run` flag that sets one config key: its dotted
// JSON path in orchestrator.Config (docs/configuration.md). The flag is
// made from this row and a set flag writes the key, so a setting the
// command line reaches is declared once here beside the config field it
// writes; validation is the config's own (Config.Validate).
type configFlag struct {
	Name string
	Key  string
	// Kind is the value's type: "int", "int64", "float" or "string".
	// A string flag given as "" leaves the key as the config has it.
	Kind  string
	Usage string
}

// runConfigFlags are run's flags that write a config key.
var runConfigFlags = []configFlag{
	{"algo", "algo", "string", "seed, grpo, static-skill, random-skill, seed-no-sft, privileged-skill or oracle-other-skill"},
	{"runs-dir", "runs_dir", "string", "where run folders go"},
	{"iterations", "iterations", "int", "stage-2 iterations"},
	{"tasks", "tasks_per_iteration", "int", "tasks per iteration (B)"},
	{"group", "rollout.group_size", "int", "trajectories per task (G)"},
	{"data-share", "data_share", "float", "share of the training set used, in (0, 1]: of --train-tasks when set, else of the whole train split (where a short run rarely repeats a task)"},
	{"train-tasks", "train_tasks", "int", "the training set: this many tasks of the seeded shuffle of the train split (0: all of it); bench sets it to what a full run consumes, iterations × tasks"},
	{"seed", "seed", "int64", "the run's seed: task order, sampling, initialisation of what is drawn"},
	{"eval-episodes", "eval.episodes", "int", "tasks per eval split"},
	{"eval-every", "eval.every", "int", "evaluate every this many iterations too (0: at the start and the end only)"},
	{"plateau-patience", "eval.plateau_patience", "int", "stop when eval-seen success has not beaten its best for this many evaluations (with --eval-every; --iterations is then the most it runs)"},
	{"eval-sampled-temperature", "eval.sampled_temperature", "float", "also play eval_seen sampled at this temperature beside the greedy eval (0: not)"},
	{"stage1-episodes", "stage1.episodes", "int", "trajectories analyzed for stage 1"},
	{"stage1-held-out", "stage1.held_out", "int", "keep at least this many stage-1 trajectories (whole groups) out of its fine-tuning and measure on them, before and after, the analyzer's skill NLL and the share of the policy's own analyses that parse (stage1.held_out)"},
	{"lr", "rl.lr", "float", "stage-2 learning rate"},
	{"lambda", "rl.lambda", "float", "λ, the weight of the gated distillation loss (paper: 0.01)"},
	{"beta", "rl.beta", "float", "β of the gate σ(β·Δ) (paper: 5)"},
	{"distill-baseline", "rl.distill_baseline", "string", "what the teacher's log-prob is compared with: the policy's own (default, the paper's) or shuffled (ours: another task's skill in the same places, the contrastive gap)"},
	{"distill-form", "rl.distill_form", "string", "the distillation term: gated_nll (the paper's, default), signed (ours: the teacher's clipped shift as a per-token reward, pushing rejected tokens down) or full (on-policy distillation: the exact per-token reverse KL to the teacher's distribution)"},
	{"distill-topk", "rl.distill_topk", "int", "with --distill-form full: keep the teacher's k most probable tokens per position and the rest as one tail bucket (0: the whole vocabulary)"},
	{"pg-coef", "rl.pg_coef", "float", "weight of the GRPO policy-gradient term (1; 0: distillation alone)"},
	{"jsd-beta", "rl.jsd_beta", "float", "with --distill-form full: TRL's GKD beta, 1 the reverse KL (default), 0 the forward KL, between them the generalized Jensen-Shannon divergence"},
	{"teacher-model", "rl.teacher_model", "string", "checkpoint of a frozen distillation teacher (same tokenizer); default: the current policy scores its own teacher contexts (the paper's)"},
	{"teacher-context", "rl.teacher_context", "string", "what the teacher reads: skill (the context with the trajectory's skill, default) or plain (standard on-policy distillation from --teacher-model; algo seed-no-sft)"},
	{"term-grads-every", "rl.term_grads_every", "int", "split the update's gradient by loss term (GRPO, distillation, KL, entropy: norms, shares, cosines in metrics.jsonl) every this many optimizer steps; one extra backward pass per term on those steps (0: off)"},
	{"rejected-cost", "rl.rejected_cost", "float", "taken off the normalised advantage of every step the environment rejected (ours; 0: none, as the public code)"},
	{"max-steps", "env.max_steps", "int", "episode step limit (training and eval)"},
	{"invalid", "rollout.invalid", "string", "what makes a step invalid: format (the reply lacks its action tag or holds CJK characters: the public code's) or env (also actions the environment rejects)"},
	{"invalid-penalty", "rollout.invalid_penalty", "float", "reward taken off per invalid step (the public code: 0.1 against a success reward of 10)"},
}

// cliFlags makes the table's flags.
func cliFlags(table []configFlag) []cli.Flag {
	out := make([]cli.Flag, 0, len(table))
	for _, f := range table {
		usage := f.Usage + " (config " + f.Key + ")"
		switch f.Kind {
		case "int":
			out = append(out, &cli.IntFlag{Name: f.Name, Usage: usage})
		case "int64":
			out = append(out, &cli.Int64Flag{Name: f.Name, Usage: usage})
		case "float":
			out = append(out, &cli.Float64Flag{Name: f.Name, Usage: usage})
		case "string":
			out = append(out, &cli.StringFlag{Name: f.Name, Usage: usage})
		default:
			panic(fmt.Sprintf("flag --%s: kind %q", f.Name, f.Kind))
		}
	}
	return out
}

// applyConfigFlags writes every set flag of the table into cfg.
func applyConfigFlags(c *cli.Context, table []configFlag, cfg *orchestrator.Config) error {
	for _, f := range table {
		if !c.IsSet(f.Name) {
			continue
		}
		var v any
		switch f.Kind {
		case "int":
			v = c.Int(f.Name)
		case "int64":
			v = c.Int64(f.Name)
		case "float":
			v = c.Float64(f.Name)
		case "string":
			s := c.String(f.Name)
			if s == "" {
				continue
			}
			v = s
		}
		if err := setConfigKey(cfg, f.Key, v); err != nil {
			return fmt.Errorf("--%s: %w", f.Name, err)
		}
	}
	return nil
}

// setConfigKey sets the config key at a dotted JSON path, leaving every
// other field as it is; a path the config does not have is an error.
func setConfigKey(cfg *orchestrator.Config, key string, v any) error {
	parts := strings.Split(key, ".")
	var obj any = v
	for i := len(parts) - 1; i >= 0; i-- {
		obj = map[string]any{parts[i]: obj}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("config key %s: %w", key, err)
	}
	return nil
}
