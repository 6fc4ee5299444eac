//go:build mutant_credit_outlives_poll

package actors

func init() { mutantCreditOutlivesPoll = true }
