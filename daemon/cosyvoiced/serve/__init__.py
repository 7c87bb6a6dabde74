"""What talks to the outside world: HTTP, AudioSocket, Wyoming, local sound devices, and the speech interface they all call."""
