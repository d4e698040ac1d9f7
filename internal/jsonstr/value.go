package jsonstr

// ValueEnd returns the length of the JSON value at the start of b, or 0
// when it finds none. It finds only where the value ends (a string's
// closing quote, the bracket closing an object or array, the end of a
// number or literal before ',', '}', ']' or a space) and checks nothing
// else: a caller that needs a valid value checks it (json.Valid).
func ValueEnd(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch b[0] {
	case '"':
		for i := 1; i < len(b); i++ {
			switch b[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return 0
	case '{', '[':
		depth := 0
		for i := 0; i < len(b); i++ {
			switch b[i] {
			case '"':
				n := ValueEnd(b[i:])
				if n == 0 {
					return 0
				}
				i += n - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return 0
	}
	for i, c := range b {
		if c == ',' || c == '}' || c == ']' || c <= ' ' {
			return i
		}
	}
	return len(b)
}
