package hub

import "go.uber.org/zap"

// nopZap silences the etcd client's own logger; the hub logs what matters.
func nopZap() *zap.Logger { return zap.NewNop() }
