package protocol

// Class is the priority class of a run's calls. A worker starts a tool's
// waiting interactive calls before its waiting batch calls; the class is
// the <class> token of the call subject ([Subjects.Call]).
type Class string

// The classes.
const (
	// ClassInteractive is for runs somebody waits on. It is the default.
	ClassInteractive Class = "interactive"
	// ClassBatch is for runs nobody waits on: their calls start only when
	// no interactive call of the same tool waits (with a bounded share, so
	// they are never starved).
	ClassBatch Class = "batch"
)

// Classes lists every class, highest priority first.
var Classes = []Class{ClassInteractive, ClassBatch}

// DefaultClient is the client of runs that no client submitted: those a
// coordinator starts itself ("coordinator run", the runner library).
const DefaultClient = "local"

// ParseClass returns the class s names; "" means [ClassInteractive].
func ParseClass(s string) (Class, error) {
	switch c := Class(s); c {
	case "":
		return ClassInteractive, nil
	case ClassInteractive, ClassBatch:
		return c, nil
	}
	return "", &Error{Code: CodeInvalidField, Field: "class", Msg: `must be "interactive" or "batch"`}
}

// Valid reports whether c is one of [Classes].
func (c Class) Valid() bool { return c == ClassInteractive || c == ClassBatch }
