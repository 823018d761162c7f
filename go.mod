module github.com/seedctl/seedctl

go 1.26.0

// gotch is built against the libtorch found on this machine: scripts/prepare-gotch.sh
// (run by ./setup.sh) writes the prepared copy this points at.
replace github.com/sugarme/gotch => ./.build/gotch

require (
	github.com/ardanlabs/jinja v1.8.0
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/dlclark/regexp2 v1.12.0
	github.com/mattn/go-isatty v0.0.20
	github.com/rs/zerolog v1.35.1
	github.com/sashabaranov/go-openai v1.43.0
	github.com/sugarme/gotch v0.9.1
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/text v0.44.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/sys v0.43.0 // indirect
)
