package jetstream

// ConnectedAddr is the address of the NATS server (or the proxy before it) that the stream's
// connection uses now.
func (s *Stream) ConnectedAddr() string { return s.nc.ConnectedAddr() }
