//go:build mutant_persisted_before_durable

package cells

func init() { mutantPersistedBeforeDurable = true }
