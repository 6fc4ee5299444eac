//go:build mutant_delete_live

package actors

func init() { mutantDeleteLive = true }
