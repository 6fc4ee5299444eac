//go:build mutant_pipeline_publishes

package eventlog

func init() { mutantPipelinePublishes = true }
