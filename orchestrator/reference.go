package orchestrator

// publicRef is what the public SEED code's launchers set for one
// environment (zhangdw156/SEED, the public copy of the authors' code),
// with the files the values are read from: Recipe labels a setting with
// its source only where the run's value is the launcher's.
type publicRef struct {
	// launcher names the RL launcher the stage-2 values come from, sft the
	// stage-1 scripts.
	launcher, sft string
	// Stage 2.
	klCoef, entropyCoef, invalidPenalty, lr            float64
	tasksPerIteration, miniBatchRows, window, maxSteps int
	// evalTemp and evalEpisodes: the launcher's validation sampling.
	evalTemp     float64
	evalEpisodes int
	// Stage 1: collection and fine-tuning.
	stage1Temp                              float64
	stage1Window, stage1MaxSteps, stage1Eps int
	stage1Epochs                            float64
	stage1MaxLen                            int
	stage1LR                                float64
	analysisMaxTokens                       int
}

// searchRef: examples/seed_trainer/_common/search.sh (via
// run_search_sft_glm_self.sh), scripts/sft/search/{prepare_data,train_sft}.sh
// and scripts/sft/_common/trainer.sh.
var searchRef = publicRef{
	launcher: "public search.sh", sft: "public search SFT scripts",
	klCoef: 0.001, entropyCoef: 0, invalidPenalty: 0.01, lr: 1e-6,
	tasksPerIteration: 128, miniBatchRows: 512, window: 4, maxSteps: 4,
	evalTemp: 0.4, evalEpisodes: 512,
	stage1Temp: 0.4, stage1Window: 4, stage1MaxSteps: 4, stage1Eps: 180 * 8, stage1Epochs: 3, stage1MaxLen: 12288, stage1LR: 5e-6,
	analysisMaxTokens: 4096,
}

// publicReference is env's public launcher values; ok is false where the
// project has not read them off a launcher (the older labels, checked in
// [fidelity-2] for ALFWorld, stay as they are).
func publicReference(env string) (publicRef, bool) {
	if env == "searchqa" {
		return searchRef, true
	}
	return publicRef{}, false
}

// webshopSFT: scripts/sft/webshop/{prepare_data,train_sft}.sh and
// scripts/sft/_common/trainer.sh (180 goals × 8 rollouts at T 0.4,
// history 2, 15 steps; 3 epochs at lr 5e-6, sequences up to 12,288
// tokens). Its RL launcher's values are not read here: only stage 1's
// line takes this reference.
var webshopSFT = publicRef{
	sft:        "public WebShop SFT scripts",
	stage1Temp: 0.4, stage1Window: 2, stage1MaxSteps: 15, stage1Eps: 180 * 8, stage1Epochs: 3, stage1MaxLen: 12288, stage1LR: 5e-6,
}

// publicSFTReference is env's public stage-1 scripts' values (the
// stage-1 fields of a publicRef).
func publicSFTReference(env string) (publicRef, bool) {
	switch env {
	case "searchqa":
		return searchRef, true
	case "webshop":
		return webshopSFT, true
	}
	return publicRef{}, false
}
