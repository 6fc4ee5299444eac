//go:build mutant_stop_on_unanswered_renewal

package election

func init() { mutantStopOnUnansweredRenewal = true }
