package transport

// PollSessions is how many workers the long-poll endpoints keep an entry for.
func (s *Server) PollSessions() int { return s.polls.len() }
