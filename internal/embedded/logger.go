package embedded

import "github.com/rs/zerolog"

// serverLogger adapts a zerolog.Logger to nats-server's Logger interface.
// Tracef is dropped: protocol traces carry message payloads.
type serverLogger struct{ l zerolog.Logger }

func (a serverLogger) Noticef(format string, v ...any) { a.l.Info().Msgf(format, v...) }
func (a serverLogger) Warnf(format string, v ...any)   { a.l.Warn().Msgf(format, v...) }
func (a serverLogger) Errorf(format string, v ...any)  { a.l.Error().Msgf(format, v...) }
func (a serverLogger) Debugf(format string, v ...any)  { a.l.Debug().Msgf(format, v...) }
func (a serverLogger) Tracef(string, ...any)           {}

// Fatalf logs at error level: the server calls it before it stops itself,
// and an embedding process must not exit because of it.
func (a serverLogger) Fatalf(format string, v ...any) {
	a.l.Error().Bool("fatal", true).Msgf(format, v...)
}
