package orchestrator

import "github.com/seedctl/seedctl/internal/dirlock"

// lockFile is the run folder's lock: held by the one process that runs or
// resumes it, released when that process ends, kill -9 included. Two
// processes on one run folder would both write its checkpoints, metrics
// and state.
const lockFile = "run.lock"

// ErrRunInUse is returned when another process holds the run folder.
var ErrRunInUse = dirlock.ErrInUse

// lockRun takes dir's lock without waiting (dirlock.Lock).
func lockRun(dir runDir) (func(), error) {
	return dirlock.Lock(string(dir), lockFile, "run folder")
}
