package daytona

func (s *Server) registerGit(t func(string, toolbox)) {}
