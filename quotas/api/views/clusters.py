"""Clusters: read by anyone authenticated, written by admins; re-applying and adopting desired state."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.errors import ApiError, ErrorSerializer
from quotas.api.permissions import IsAdminOrReadOnly, IsAdminToReapply, SeesOperations
from quotas.api.serializers.clusters import ClusterDetailSerializer, ClusterSerializer
from quotas.api.serializers.pushes import (
    AdoptRequestSerializer,
    AdoptResponseSerializer,
    PushSummarySerializer,
    ReapplyRequestSerializer,
    ReapplyResponseSerializer,
)
from quotas.api.views.base import ERRORS, get_cluster
from quotas.models import Cluster
from quotas.push import resolve
from quotas.queries import push_summary
from quotas.reapply import enqueue_heal, reapply_target


@extend_schema_view(
    list=extend_schema(summary="List clusters"),
    retrieve=extend_schema(
        summary="A cluster, with its budget enforcement",
        description="`budget_enforcement` says whether its cluster-wide budgets are shared out by demand "
        "(coordinated), a broker is on its fallback, or no broker's plugin reports (off).",
        responses={200: ClusterDetailSerializer, 404: ErrorSerializer},
    ),
    create=extend_schema(summary="Add a cluster (admins)", responses={201: ClusterSerializer, **ERRORS}),
    update=extend_schema(summary="Change a cluster (admins)", responses={200: ClusterSerializer, **ERRORS}),
    partial_update=extend_schema(
        summary="Change some fields of a cluster (admins)", responses={200: ClusterSerializer, **ERRORS}
    ),
)
class ClusterViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Clusters, by name. Anyone authenticated reads; only admins create or change them (no deletes here:
    a cluster's quotas and push history go with it, which deserves its own confirmation)."""

    serializer_class = ClusterSerializer
    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    lookup_field = "name"
    lookup_url_kwarg = "cluster"
    lookup_value_regex = r"[A-Za-z0-9][A-Za-z0-9_-]*"  # cluster_name_validator, unanchored

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.select_related("desired_state").prefetch_related("brokers", "listeners")

    def get_serializer_class(self) -> type[ClusterSerializer]:
        return ClusterDetailSerializer if self.action == "retrieve" else ClusterSerializer

    def get_object(self) -> Cluster:
        cluster = get_cluster(self.kwargs["cluster"])
        self.check_object_permissions(self.request, cluster)
        return cluster

    @extend_schema(
        operation_id="reapply_desired_state",
        summary="Re-apply the whole desired state to one broker of the cluster (admins)",
        description=(
            "Queues the Celery task quotas.tasks.heal, which writes the cluster's whole desired state to the target "
            "whatever version it claims, and closes the target's open drift as healed (audited, with you as the "
            "actor). `broker` names a broker id of a per_broker cluster; a cluster_wide cluster has one namespace: "
            "send null. Answers 202 once the task is queued; GET /api/drift/ and "
            "GET /api/clusters/{cluster}/pushes/summary/ show the outcome."
        ),
        request=ReapplyRequestSerializer,
        responses={202: ReapplyResponseSerializer, **ERRORS, 503: ErrorSerializer},
    )
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated, IsAdminToReapply])
    def reapply(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = ReapplyRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        broker = reapply_target(target, body.validated_data["broker"])
        task_id = enqueue_heal(target, broker, request.user)
        answer = {
            "cluster": target.name,
            "broker": broker.broker_id if broker is not None else None,
            "task_id": task_id,
            "status": "queued",
        }
        return Response(ReapplyResponseSerializer(answer).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="adopt_drift",
        summary="Adopt what the cluster holds into desired state, for some quota drift (admins)",
        description=(
            "For each named open quota drift row: an extra or different quota's value on the cluster becomes the "
            "desired value, a missing one is removed from desired state. One new desired-state version, audited with "
            "you as the actor; the rows close as adopted. All or nothing: a row that is not open, or is a config "
            "(re-apply those instead), refuses the whole call with INVALID_REQUEST."
        ),
        request=AdoptRequestSerializer,
        responses={200: AdoptResponseSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated, IsAdminToReapply])
    def adopt(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = AdoptRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ids = sorted(set(body.validated_data["drift"]))
        try:
            version = resolve.adopt(target, ids, request.user)
        except resolve.NotAdoptable as e:
            raise ApiError("INVALID_REQUEST", str(e), {"drift": [str(e)]}) from e
        return Response(AdoptResponseSerializer({"cluster": target.name, "version": version, "adopted": ids}).data)

    @extend_schema(
        operation_id="cluster_push_summary",
        summary="Where each broker stands against the cluster's desired state (admins and auditors)",
        description=(
            "The desired-state version and, per target (each broker, or the cluster-wide namespace), the newest "
            "version the portal saw land, the pending and failed versions, the newest outstanding error and the "
            "open drift. Built from aggregate queries over the push history, never by asking the brokers."
        ),
        responses={200: PushSummarySerializer, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="pushes/summary",
        url_name="push-summary",
        permission_classes=[permissions.IsAuthenticated, SeesOperations],
    )
    def pushes_summary(self, request: Request, cluster: str) -> Response:
        return Response(PushSummarySerializer(push_summary(get_cluster(cluster))).data)


