package sqlstore

// Neighbours returns nil when found holds consumer itself, and found otherwise.
func Neighbours(consumer string, found []string) []string {
	for _, c := range found {
		if c == consumer {
			return nil
		}
	}
	return found
}
