package searchqa

import (
	"flag"
	"testing"

	"github.com/seedctl/seedctl/envadapters/envtest"
)

var update = flag.Bool("update", false, "rewrite testdata golden transcripts")

// TestGoldenTranscripts: the same seed gives the same tasks and transcripts.
func TestGoldenTranscripts(t *testing.T) { envtest.GoldenTranscripts(t, builtin{}, 4, *update) }
