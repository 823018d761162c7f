package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/trainer"
)

// version is set at build time: go build -ldflags "-X main.version=v0.1.0".
var version = "dev"

func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" && version == "dev" {
			v += " (" + rev + dirty + ")"
		}
	}
	return v
}

func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Version + " (prepared copy at " + d.Replace.Path + ")"
			}
			return d.Version
		}
	}
	return "unknown"
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print seedctl's version and the versions it was built with",
		Action: func(c *cli.Context) error {
			w := c.App.Writer
			fmt.Fprintf(w, "seedctl %s\n", versionString())
			fmt.Fprintf(w, "go      %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			fmt.Fprintf(w, "gotch   %s\n", moduleVersion("github.com/sugarme/gotch"))
			if info, err := trainer.Runtime(); err != nil {
				fmt.Fprintf(w, "libtorch unknown (%v)\n", err)
			} else {
				fmt.Fprintf(w, "libtorch %s (%s) %s\n", info.LibtorchVersion, info.Device(), info.LibtorchPath)
			}
			return nil
		},
	}
}
