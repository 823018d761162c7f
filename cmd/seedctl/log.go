package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// newLogger builds the process logger: human-readable lines for a terminal,
// or JSON events for log collectors.
func newLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(strings.TrimSpace(level)))
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", level)
	}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "json":
		return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
	case "console", "":
		noColor := true
		if f, ok := w.(*os.File); ok {
			noColor = !isatty.IsTerminal(f.Fd())
		}
		cw := zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: noColor}
		return zerolog.New(cw).Level(lvl).With().Timestamp().Logger(), nil
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: want console or json", format)
	}
}
