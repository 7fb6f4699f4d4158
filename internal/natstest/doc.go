// Package natstest runs embedded JetStream servers for tests: a random
// loopback port, a store under t.TempDir() and shutdown on cleanup, plus
// connections that close on cleanup and a restart on the same port and store
// for fault tests.
package natstest
