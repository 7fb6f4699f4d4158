// Package demo is the coordinator's bundled default model: a deterministic
// [loop.Model] that answers the arithmetic in the prompt it is given with
// the fleet's calculator tool. It is a demo of the fleet — parallel calls,
// a dependent round, typed failures — and says so: it is not a language
// model and never pretends to be one.
//
// # What it reads
//
// The last user message of the transcript, lowercased, as a stream of
// tokens: numbers (7, 3.5, 1e3, 1,000, and the words zero to twenty,
// thirty … ninety, twenty-one, hundred, thousand), the operators + - * / %
// ** ^ × ÷, parentheses, and the words plus, minus, times, x, multiplied
// by, divided by, over, mod, modulo, to the power of, raised to (the power
// of), squared and cubed. Every other word or punctuation mark separates
// expressions. Each longest well-formed run of tokens with at least one
// operator is an expression, written in the calculator's syntax:
// "What is 7 times 6? And 2 to the power of 10?" reads as "7 * 6" and
// "2 ** 10".
//
// # What it does
//
//   - First model call of a turn: one calculator call per expression (at
//     most [MaxExpressions]), all in the same round, so the fleet runs them
//     in parallel.
//   - When the prompt asks for "their sum" (the sum, the total, add them,
//     in total …) or "their product" (multiply them …) of two or more
//     results, a second round asks the calculator to combine them. It
//     depends on the first round's results, so it waits for them.
//   - Then it answers with the results: "7 * 6 = 42 and 2 ** 10 = 1024."
//     A failed call is named with its observation ("1 / 0 could not be
//     evaluated: \"Tool 'calculator' failed: *harness.EvaluationError\"").
//   - A prompt without arithmetic, a prompt longer than [MaxPromptBytes],
//     or a fleet that does not serve the calculator gets an answer that
//     says what the demo model can do and how to point --model at a real
//     provider.
//
// The position in a run is the number of assistant messages after the last
// user message, and the results are the transcript's tool messages, so one
// Model serves any number of concurrent runs and a resumed run continues
// where it stopped. Call ids are "demo_<turn>_<round>_<n>", unique in a
// transcript of several turns.
//
// # Caveats
//
// Reading is linear in the prompt and bounded: at most [MaxPromptBytes]
// are read, an expression has at most 128 tokens and 64 levels of nesting,
// a number at most 64 characters. What the calculator refuses (division by
// zero, 1e308 ** 1e308, nesting past its own bound) comes back as a failed
// observation, which the answer reports.
package demo
