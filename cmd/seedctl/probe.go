package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters/agentgym"
	"github.com/seedctl/seedctl/inference"
	"github.com/seedctl/seedctl/orchestrator"
)

// probeIDs is the prompt the backend probe generates from and scores: ids
// every tokenizer has.
var probeIDs = []int{1, 2, 3, 4}

// probeConfig contacts the servers a config names — the inference backend
// when it is already running, the external analyzer when the run uses it,
// AgentGym env servers and a Search-R1 retriever — and reports one line per
// check; it returns how many checks failed (warnings do not count).
func probeConfig(ctx context.Context, w io.Writer, file string, cfg orchestrator.Config, log zerolog.Logger) int {
	failed := 0
	report := func(target string, c inference.ProbeCheck) {
		state, text := "ok", c.Detail
		switch {
		case c.Err != nil && c.Warn:
			state, text = "WARN", c.Err.Error()
		case c.Err != nil:
			state, text = "FAIL", c.Err.Error()
			failed++
		}
		fmt.Fprintf(w, "%s: probe %s %s: %s: %s\n", file, target, c.Name, state, text)
	}
	b := cfg.Backend
	switch {
	case b.Kind == "embedded":
		fmt.Fprintf(w, "%s: probe backend: embedded, started by the run (nothing to probe)\n", file)
	case len(b.Launch) > 0:
		// The server is started by the run; what can be checked before is
		// whether it could serve this model here, and the command line.
		ic := backendConfig(b, 0)
		ic.ServedDir = b.ServedDir
		platform := inference.DetectPlatform()
		if err := inference.CheckServable(cfg.Model, ic, platform); err != nil {
			report("backend launch", inference.ProbeCheck{Name: "servable", Err: err})
			break
		}
		args, _, err := inference.LaunchArgs(inference.LaunchSpec{Command: b.Launch[0], ModelDir: cfg.Model, ExtraArgs: b.Launch[1:]}, ic, platform)
		if err != nil {
			report("backend launch", inference.ProbeCheck{Name: "command", Err: err})
			break
		}
		report("backend launch", inference.ProbeCheck{Name: "servable", Detail: fmt.Sprintf("%s on %s would start as: %s (not started by the probe)", b.Kind, platform, strings.Join(args, " "))})
	default:
		for _, u := range b.URLs() {
			ic := backendConfig(b, 5*time.Second)
			ic.BaseURL, ic.RequestTimeout = u, 30*time.Second
			target := "backend"
			if len(b.Endpoints) > 0 {
				target = "backend " + u
			}
			be, err := inference.NewRemote(ic, log)
			if err != nil {
				report(target, inference.ProbeCheck{Name: "config", Err: err})
				continue
			}
			for _, c := range inference.Probe(ctx, be, probeIDs) {
				report(target, c)
			}
			be.Close()
		}
	}
	if a := cfg.Stage1.Analyzer; a.Kind == "external" && cfg.UsesStage1Analyzer() {
		cc := inference.DefaultChatConfig(a.BaseURL, a.Model)
		cc.APIKeyEnv, cc.RetryFor, cc.Timeout = a.APIKeyEnv, 5*time.Second, 30*time.Second
		client, err := inference.NewChatClient(cc, log)
		if err != nil {
			report("analyzer", inference.ProbeCheck{Name: "config", Err: err})
		} else {
			report("analyzer", inference.ProbeChat(ctx, client))
		}
	}
	if cfg.Env.Kind == "agentgym" {
		c := reachable(ctx, cfg.Env.URL)
		report("env", c)
		if c.Err == nil {
			report("env", flavorCheck(ctx, cfg.Env))
		}
	}
	if u := cfg.Env.Options["retriever_url"]; u != "" {
		report("retriever", reachable(ctx, u))
	}
	return failed
}

// flavorCheck resets one env of an AgentGym server and checks that it
// answers as the configured flavor (and goal, with env.goals_file).
func flavorCheck(ctx context.Context, env orchestrator.EnvConfig) inference.ProbeCheck {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	detail, err := orchestrator.ProbeRemoteEnv(ctx, env)
	return inference.ProbeCheck{Name: "flavor", Detail: detail, Err: err, Warn: errors.Is(err, agentgym.ErrNoFlavorMarks)}
}

// reachable checks that an HTTP server answers at url (any status: env
// servers and retrievers have no common health route).
func reachable(ctx context.Context, url string) inference.ProbeCheck {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return inference.ProbeCheck{Name: "reachable", Err: fmt.Errorf("url %q: %w", url, err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return inference.ProbeCheck{Name: "reachable", Err: fmt.Errorf("GET %s: %w", url, err)}
	}
	resp.Body.Close()
	return inference.ProbeCheck{Name: "reachable", Detail: fmt.Sprintf("GET %s answered %s", url, resp.Status)}
}
