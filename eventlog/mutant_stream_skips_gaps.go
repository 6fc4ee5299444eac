//go:build mutant_stream_skips_gaps

package eventlog

func init() { mutantStreamSkipsGaps = true }
