//go:build mutant_poll_keeps_offer

package longpoll

func init() { mutantKeepsOffer = true }
