//go:build mutant_heartbeat_fixed

package actors

func init() { mutantHeartbeatFixed = true }
