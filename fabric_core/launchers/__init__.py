"""fabric_core.launchers"""
