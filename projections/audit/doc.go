// Package audit answers, from a data directory alone and with the server stopped, what happened
// to a job, who did it, and whether the record can be trusted. It is `tether replay`.
//
//   - Verify walks the whole hash chain, checks the stream index against it, rebuilds every
//     projection from scratch and compares the rebuilt state with the newest checkpoint.
//   - History tells one job's story from its stream.
//   - StateAt rebuilds the projections as they stood at a seq (SeqAt finds the seq for a time).
//   - Export writes records as JSON Lines; VerifyExport re-verifies such a file without the log.
//   - CheckReceipt confirms that a receipt {seq, hash} a client or worker was given is in the log.
//
// Every function reads the log through a read-only eventlog.Log, which refuses a store a running
// server holds (eventlog.ErrInUse), and walks it in seq order: memory grows with the state the
// projections hold, never with the length of the log.
//
// A failure to verify is an error that names the first bad seq: an *eventlog.ChainError for a
// record that was changed, dropped or moved, or a *FoldError for a record the projections cannot
// fold (an event that breaks the lifecycle), or a *CheckpointError for a checkpoint that does not
// equal the replay. The functions never write to the data directory; ExportFile writes its file
// whole or not at all.
package audit
