"""Project-level API endpoints that belong to no domain app."""

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from rest_framework import generics, serializers


class CurrentUserSerializer(serializers.ModelSerializer):
    """Who the caller is, as the API sees them."""

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "is_staff"]
        read_only_fields = fields


class CurrentUserView(generics.RetrieveAPIView):
    """The authenticated caller: lets a client check its token and lets the UI know who is logged in."""

    serializer_class = CurrentUserSerializer

    def get_object(self) -> AbstractBaseUser:
        """The caller; IsAuthenticated has already turned anonymous requests away."""
        return self.request.user
