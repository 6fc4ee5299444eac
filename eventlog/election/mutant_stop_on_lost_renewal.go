//go:build mutant_stop_on_lost_renewal

package election

func init() { mutantStopOnRefusedRenewal = true }
