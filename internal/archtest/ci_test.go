package archtest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestCIRunsTheReadmeTestLine keeps .ci/run and the README's test command
// identical: CI must test exactly what a user is told to run.
func TestCIRunsTheReadmeTestLine(t *testing.T) {
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^readme_test_line='([^']+)'$`).FindSubmatch(ci)
	if m == nil {
		t.Fatal(".ci/run has no readme_test_line='...' assignment")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := "Run the tests:\n\n```sh\n" + string(m[1]) + "\n```"
	if !strings.Contains(string(readme), block) {
		t.Fatalf("README.md does not show .ci/run's test line %q under \"Run the tests:\"", m[1])
	}
}
