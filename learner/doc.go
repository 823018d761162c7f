// Package learner is the orchestrator's Learner over the trainer: Local,
// one process, and Dist, a data-parallel group of ranks over c10d.
//
// Dist (seedctl run --nproc N): the orchestrator stays one process; its learner is rank 0
// of a data-parallel group over c10d (trainer.ProcessGroup), and ranks
// 1..N-1 are child processes (`seedctl learner-rank`) that load the same
// policy and take the same commands over their stdin (one JSON object a
// line) and answer on their stdout. Each RL step sends every rank the
// rows; each trains on its share (row i to rank i mod N), the gradients
// are summed across the group and all ranks step alike. Stage-1 SFT runs
// the same way. Rescoring is spread over the ranks (every rank holds the
// same weights); checkpoints are rank 0's, with each rank's optimizer
// shard beside them under --zero.
//
// Several hosts: --world-size W above --nproc N leaves W-N ranks to other
// hosts, where `seedctl learner-node --connect HOST:PORT --nproc K` starts
// K ranks that dial this run's control port (--listen) and speak the same
// protocol over TCP. The run assigns their ranks in the order they
// connect and tells each in its "load" where the c10d rendezvous is
// (--master-addr, --master-port). The model and the run folder must be at
// the same path on every host (a shared filesystem), as under torchrun.
//
// The commands and rows travel as JSON lines (rankRequest, rankReply)
// over a rank's stdin and stdout, or, for other hosts, over the learner
// port after the handshake of auth.go. ServeRank is a rank's side.
package learner
