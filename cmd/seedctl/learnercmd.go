package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/learner"
)

// learnerRankCommand is a worker rank of run --nproc (not for users: the
// run starts it and talks to it on stdin and stdout; with --connect it
// dials a run on another host, as learner-node starts it).
func learnerRankCommand() *cli.Command {
	return &cli.Command{
		Name:   "learner-rank",
		Usage:  "one learner rank of seedctl run --nproc N (started by the run; commands on stdin, or over TCP with --connect)",
		Hidden: true,
		Flags: []cli.Flag{&cli.StringFlag{Name: "device", Value: "cpu", Usage: "trainer device"},
			&cli.StringFlag{Name: "connect", Usage: "dial the run's --listen address (HOST:PORT) and take commands there"},
			&cli.DurationFlag{Name: "connect-timeout", Value: learner.DefaultDistTimeout, Usage: "keep dialling and retrying the handshake this long (the run may start later, or be busy)"}},
		Action: func(c *cli.Context) error {
			addr := c.String("connect")
			if addr == "" {
				return learner.ServeRank(c.Context, c.String("device"), os.Stdin, os.Stdout)
			}
			secret, err := learner.RankSecret()
			if err != nil {
				return cli.Exit("learner-rank: "+err.Error(), 2)
			}
			host, _ := os.Hostname()
			conn, in, err := learner.JoinRunRetrying(c.Context, addr, secret, host, os.Getpid(), c.Duration("connect-timeout"))
			if err != nil {
				return cli.Exit("learner-rank: "+err.Error(), 1)
			}
			defer conn.Close()
			return learner.ServeRank(c.Context, c.String("device"), in, conn)
		},
	}
}

// learnerNodeCommand starts K learner ranks on this host for a run on
// another (torchrun's role on the other nodes): each dials the run, which
// numbers them; it ends when they all have, failing if one failed.
func learnerNodeCommand() *cli.Command {
	return &cli.Command{
		Name:        "learner-node",
		Usage:       "start learner ranks on this host for a seedctl run --world-size W on another host (they dial its --listen address)",
		Description: "SEEDCTL_RANK_SECRET must hold the same secret on both hosts.\n\nExample:\n   seedctl learner-node --connect hostA:29501 --nproc 4   # on hostB, while hostA runs: seedctl run --nproc 4 --world-size 8 --master-addr hostA --master-port 29500 --listen hostA:29501",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "connect", Required: true, Usage: "the run's --listen address as this host reaches it (HOST:PORT)"},
			&cli.IntFlag{Name: "nproc", Value: 1, Usage: "learner ranks to start here"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "trainer device"},
			&cli.DurationFlag{Name: "connect-timeout", Value: learner.DefaultDistTimeout, Usage: "how long each rank keeps dialling"},
		},
		Action: func(c *cli.Context) error {
			n := c.Int("nproc")
			if n < 1 {
				return cli.Exit(fmt.Sprintf("learner-node: --nproc %d: want 1 or more ranks", n), 2)
			}
			if _, _, err := net.SplitHostPort(c.String("connect")); err != nil {
				return cli.Exit(fmt.Sprintf("learner-node: --connect %q: want HOST:PORT, the run's --listen address (%v)", c.String("connect"), err), 2)
			}
			if _, err := learner.RankSecret(); err != nil {
				return cli.Exit("learner-node: "+err.Error(), 2)
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cmds := make([]*exec.Cmd, n)
			for i := range cmds {
				dev, err := learner.RankDevice(c.String("device"), i, n)
				if err != nil {
					return cli.Exit("learner-node: "+err.Error(), 2)
				}
				cmds[i] = exec.CommandContext(c.Context, self, "learner-rank", "--device", dev,
					"--connect", c.String("connect"), "--connect-timeout", c.Duration("connect-timeout").String())
				cmds[i].Stdout, cmds[i].Stderr = os.Stderr, os.Stderr
				if err := cmds[i].Start(); err != nil {
					return cli.Exit(fmt.Sprintf("learner-node: starting rank process %d of %d: %v", i+1, n, err), 1)
				}
			}
			var errs []error
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					errs = append(errs, fmt.Errorf("rank process %d of %d: %w", i+1, n, err))
				}
			}
			if err := errors.Join(errs...); err != nil {
				return cli.Exit("learner-node: "+err.Error(), 1)
			}
			return nil
		},
	}
}
