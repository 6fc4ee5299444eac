//go:build mutant_starve_tenants

package actors

func init() { mutantStarveTenants = true }
